# SPDX-License-Identifier: Apache-2.0
# The message-type headers that include/switchyard/ uses and that are
# therefore installed: value types only, none may include a CAF header
# (tests/package checks it). ops.hpp and what it includes are the op set
# that backend.hpp (custom backends) brings.
set(SWITCHYARD_PUBLIC_MESSAGE_HEADERS "")
foreach(header bytes device_stats dtype dtype_support half op_kinds ops scalar shape std_memory tensor_data tensor_id
               tensor_ir)
  list(APPEND SWITCHYARD_PUBLIC_MESSAGE_HEADERS
    "${PROJECT_SOURCE_DIR}/messages/include/switchyard/messages/${header}.hpp")
endforeach()
