// SPDX-License-Identifier: Apache-2.0
#include "batcher.hpp"

#include <algorithm>
#include <numeric>

#include "replica_choice.hpp"

namespace sy = switchyard;

namespace serve {

Replica place(const mlp::Model& m, const sy::Device& d) {
  Replica r{d, {}, {}};
  for (const auto& l : m.layers) {
    r.weights.push_back(d.tensor(l.weight, sy::Shape{int64_t{l.out}, int64_t{l.in}}));
    r.biases.push_back(d.tensor(l.bias, sy::Shape{int64_t{l.out}}));
  }
  return r;
}

Batcher::Batcher(const mlp::Model& model, std::vector<Replica> replicas, BatchOptions opts)
    : in_width_(model.input_width()),
      out_width_(model.output_width()),
      replicas_(std::move(replicas)),
      opts_(opts),
      in_flight_(replicas_.size(), 0),
      dispatched_(replicas_.size(), 0),
      lost_(replicas_.size(), 0) {
  if (replicas_.empty()) throw std::invalid_argument("Batcher: no replicas");
  opts_.max_batch = std::max<int64_t>(opts_.max_batch, 1);
  opts_.max_inflight = std::max<int64_t>(opts_.max_inflight, 1);
  thread_ = std::thread([this] { loop(); });
}

Batcher::~Batcher() { stop(); }

sy::Future<Rows> Batcher::submit(std::vector<float> rows, int64_t n, bool inject_fault) {
  auto job = std::make_shared<Job>();
  job->rows = std::move(rows);
  job->n = n;
  job->inject_fault = inject_fault;
  job->arrived = std::chrono::steady_clock::now();
  auto fut = job->done.future();
  {
    std::lock_guard lock(mu_);
    if (stopping_) {
      job->done.set_error(std::make_exception_ptr(sy::Error(sy::Errc::runtime_closed, "the server is shutting down")));
      return fut;
    }
    queue_.push_back(std::move(job));
    queued_rows_ += n;
  }
  cv_.notify_all();
  return fut;
}

void Batcher::drain() {
  {
    std::lock_guard lock(mu_);
    draining_ = true;
  }
  cv_.notify_all();
}

void Batcher::stop(std::chrono::milliseconds limit) {
  {
    std::lock_guard lock(mu_);
    draining_ = true;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Continuations of batches still on a device call finish(), which touches
  // this object: wait for them before it can go away.
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, limit,
               [&] { return std::all_of(in_flight_.begin(), in_flight_.end(), [](int64_t n) { return n == 0; }); });
}

std::vector<int64_t> Batcher::in_flight() const {
  std::lock_guard lock(mu_);
  return in_flight_;
}

std::vector<uint64_t> Batcher::dispatched() const {
  std::lock_guard lock(mu_);
  return dispatched_;
}

void Batcher::loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return !queue_.empty() || stopping_; });
    if (queue_.empty()) return;  // stopping, nothing left
    // Only this thread pops, so the front stays put while we wait.
    const auto deadline = queue_.front()->arrived + opts_.window;
    cv_.wait_until(lock, deadline,
                   [&] { return draining_ || queued_rows_ >= opts_.max_batch || queue_.front()->inject_fault; });
    auto least_loaded = [&] {
      serve::mark_lost(lost_, [&](size_t i) { return replicas_[i].device; });
      return serve::least_loaded(in_flight_, lost_, next_);
    };
    // All replicas busy: keep the batch open (it may grow to max_batch).
    cv_.wait(lock, [&] { return draining_ || in_flight_[least_loaded()] < opts_.max_inflight; });
    queued_rows_ -= drop_expired(queue_, opts_.give_up_after, [](const Job& j) { return j.n; });
    if (queue_.empty()) continue;

    std::vector<std::shared_ptr<Job>> jobs;
    int64_t rows = 0;
    bool alone = queue_.front()->inject_fault;
    do {
      rows += queue_.front()->n;
      jobs.push_back(std::move(queue_.front()));
      queue_.pop_front();
    } while (!alone && !queue_.empty() && !queue_.front()->inject_fault && rows + queue_.front()->n <= opts_.max_batch);
    queued_rows_ -= rows;
    size_t r = least_loaded();
    ++in_flight_[r];
    ++dispatched_[r];
    next_ = r + 1;
    lock.unlock();
    dispatch(r, jobs, rows);
    jobs.clear();  // our references go before the lock is taken again
    lock.lock();
  }
}

void Batcher::dispatch(size_t r, const std::vector<std::shared_ptr<Job>>& jobs, int64_t rows) {
  batch_rows_.observe(static_cast<double>(rows));
  try {
    std::vector<float> flat;
    flat.reserve(static_cast<size_t>(rows * in_width_));
    bool fault = false;
    for (const auto& j : jobs) {
      flat.insert(flat.end(), j->rows.begin(), j->rows.end());
      fault = fault || j->inject_fault;
    }
    const Replica& rep = replicas_[r];
    auto x = rep.device.tensor(flat, sy::Shape{rows, in_width_});
    for (size_t i = 0; i < rep.weights.size(); ++i) {
      x = x.linear(rep.weights[i], rep.biases[i]);
      if (i + 1 < rep.weights.size()) x = x.relu();
    }
    if (fault) {
      // Integer remainder by zero fails on the device: the read below then
      // fails as a real device failure would.
      auto poison = rep.device.full({1}, 1, sy::DType::i32).remainder(rep.device.zeros({1}, sy::DType::i32));
      x = x + poison.cast(sy::DType::f32);
    }
    sy::Future<void> split = x.read().then([jobs, w = out_width_](const sy::TensorData& d) {
      auto v = d.as<float>();
      size_t off = 0;
      for (const auto& j : jobs) {
        size_t k = static_cast<size_t>(j->n * w);
        j->done.set_value(Rows(v.begin() + off, v.begin() + off + k));
        off += k;
      }
    });
    split.on_complete([this, r, jobs](const std::exception_ptr& e) {
      if (e)
        for (const auto& j : jobs) j->done.set_error(e);
      finish(r, e);
    });
  } catch (...) {
    auto e = std::current_exception();
    for (const auto& j : jobs) j->done.set_error(e);
    finish(r, e);
  }
}

void Batcher::finish(size_t r, const std::exception_ptr& failure) {
  const bool lost = device_lost(failure);
  // Notified under the lock: once stop() sees the last batch finish it may
  // destroy the Batcher, and with it cv_, which a notify after the unlock
  // could still be using (TSan caught it at shutdown).
  std::lock_guard lock(mu_);
  --in_flight_[r];
  if (lost) lost_[r] = 1;
  cv_.notify_all();
}

}  // namespace serve
