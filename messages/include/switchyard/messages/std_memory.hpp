// SPDX-License-Identifier: Apache-2.0
#pragma once

/// \file
/// `std::shared_ptr`, `std::unique_ptr`, `std::make_shared` and `std::hash`
/// without the rest of `<memory>`.
///
/// libstdc++ keeps the smart pointers in `<bits/shared_ptr.h>` (which brings
/// `<bits/unique_ptr.h>` and `<bits/functional_hash.h>`); the full header
/// adds atomic shared pointers, `auto_ptr`, the ranges algorithms on
/// uninitialized memory and the parallel algorithms' declarations, a sixth of
/// what the public headers cost a consumer's translation unit
/// (docs/PERFORMANCE.md). Other standard libraries get the whole header.

#include <version>

#if defined(__GLIBCXX__) && __has_include(<bits/shared_ptr.h>)
#include <bits/shared_ptr.h>
#else
#include <memory>
#endif
