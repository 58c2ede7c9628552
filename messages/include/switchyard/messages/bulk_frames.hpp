// SPDX-License-Identifier: Apache-2.0
#pragma once

// The bulk lane's wire format: a second TCP connection beside a worker's
// BASP connection, on which a tensor's bytes travel raw, written from the
// tensor's own block and read straight into the destination's, where BASP
// copies every part four times. Announced in the hello reply (port and a
// per-client token); carries nothing but bytes and the few numbers needed
// to place them (protocol.hpp: BulkTicket, BulkImport).
//
//   client -> worker, once:  "SYBULK01", 16-byte token
//   worker -> client, once:  1 byte, 1: admitted (else the worker closes)
//   client -> worker:        upload frames
//   worker -> client:        read-data and upload-ack frames
//
// Numbers are little-endian. Every length is checked against what the
// receiver expects before anything is allocated.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "switchyard/messages/dtype.hpp"
#include "switchyard/messages/shape.hpp"
#include "switchyard/messages/tensor_id.hpp"

namespace switchyard::bulk {

inline constexpr std::array<char, 8> magic = {'S', 'Y', 'B', 'U', 'L', 'K', '0', '1'};
inline constexpr size_t token_bytes = 16;
inline constexpr size_t hello_bytes = magic.size() + token_bytes;
inline constexpr uint8_t admitted = 1;

enum class FrameKind : uint8_t {
  upload = 1,      // client -> worker: a tensor for one of the worker's devices
  read_data = 2,   // worker -> client: the bytes of a read (BulkTicket)
  upload_ack = 3,  // worker -> client: an upload reached its runner
};

/// Rank accepted in an upload header (check_shape bounds it further).
inline constexpr size_t max_rank = 64;

/// An upload's header: kind, device index (on the worker, as the hello
/// listed them), tensor id, dtype, rank, byte count, flags, then rank
/// extents.
struct UploadHeader {
  uint32_t device = 0;
  TensorId id;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t bytes = 0;
  /// A bridge from a device of the client's (counted as bridged in by the
  /// worker's device), not an upload of host data.
  bool bridge = false;
};
inline constexpr size_t upload_fixed_bytes = 1 + 4 + 8 + 1 + 1 + 8 + 1;

/// A worker's frame header: kind, number (ticket or tensor id), byte count
/// of the body that follows (0 for an ack).
struct ReplyHeader {
  FrameKind kind = FrameKind::read_data;
  uint64_t number = 0;
  uint64_t bytes = 0;
};
inline constexpr size_t reply_header_bytes = 1 + 8 + 8;

namespace detail {
template <class T>
void put(std::vector<uint8_t>& out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i)));
}
template <class T>
T get(const uint8_t* p) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= uint64_t{p[i]} << (8 * i);
  return static_cast<T>(v);
}
}  // namespace detail

[[nodiscard]] inline std::vector<uint8_t> encode(const UploadHeader& h) {
  std::vector<uint8_t> out;
  out.reserve(upload_fixed_bytes + 8 * h.shape.rank());
  detail::put(out, static_cast<uint8_t>(FrameKind::upload));
  detail::put(out, h.device);
  detail::put(out, h.id.value);
  detail::put(out, static_cast<uint8_t>(h.dtype));
  detail::put(out, static_cast<uint8_t>(h.shape.rank()));
  detail::put(out, h.bytes);
  detail::put(out, static_cast<uint8_t>(h.bridge ? 1 : 0));
  for (auto d : h.shape.dims) detail::put(out, static_cast<uint64_t>(d));
  return out;
}

/// The fixed part of an upload header: nullopt if it is not one (wrong
/// kind, rank over max_rank). The extents follow (`rank` of them).
struct UploadPrefix {
  UploadHeader header;
  size_t rank = 0;
};
[[nodiscard]] inline std::optional<UploadPrefix> decode_upload_prefix(const uint8_t* p) {
  if (p[0] != static_cast<uint8_t>(FrameKind::upload)) return std::nullopt;
  UploadPrefix out;
  out.header.device = detail::get<uint32_t>(p + 1);
  out.header.id = TensorId{detail::get<uint64_t>(p + 5)};
  out.header.dtype = static_cast<DType>(p[13]);
  out.rank = p[14];
  out.header.bytes = detail::get<uint64_t>(p + 15);
  if (p[23] > 1 || out.rank > max_rank || !is_valid(out.header.dtype)) return std::nullopt;
  out.header.bridge = p[23] == 1;
  return out;
}

/// Reads `rank` extents; false if one is negative as int64.
[[nodiscard]] inline bool decode_dims(const uint8_t* p, size_t rank, Shape& shape) {
  std::vector<int64_t> dims(rank);
  for (size_t i = 0; i < rank; ++i) {
    dims[i] = static_cast<int64_t>(detail::get<uint64_t>(p + 8 * i));
    if (dims[i] < 0) return false;
  }
  shape = Shape(dims);
  return true;
}

[[nodiscard]] inline std::array<uint8_t, reply_header_bytes> encode(const ReplyHeader& h) {
  std::array<uint8_t, reply_header_bytes> out{};
  out[0] = static_cast<uint8_t>(h.kind);
  for (size_t i = 0; i < 8; ++i) {
    out[1 + i] = static_cast<uint8_t>(h.number >> (8 * i));
    out[9 + i] = static_cast<uint8_t>(h.bytes >> (8 * i));
  }
  return out;
}

[[nodiscard]] inline std::optional<ReplyHeader> decode_reply(const uint8_t* p) {
  ReplyHeader h;
  if (p[0] != static_cast<uint8_t>(FrameKind::read_data) && p[0] != static_cast<uint8_t>(FrameKind::upload_ack))
    return std::nullopt;
  h.kind = static_cast<FrameKind>(p[0]);
  h.number = detail::get<uint64_t>(p + 1);
  h.bytes = detail::get<uint64_t>(p + 9);
  if (h.kind == FrameKind::upload_ack && h.bytes != 0) return std::nullopt;
  return h;
}

}  // namespace switchyard::bulk
