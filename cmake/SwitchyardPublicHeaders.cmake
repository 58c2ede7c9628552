# SPDX-License-Identifier: Apache-2.0
# The message-type headers that include/switchyard/ uses and that are
# therefore installed: value types only, none may include a CAF header
# (tests/package checks it).
set(SWITCHYARD_PUBLIC_MESSAGE_HEADERS "")
foreach(header bytes device_stats dtype dtype_support half op_kinds scalar shape tensor_data tensor_id)
  list(APPEND SWITCHYARD_PUBLIC_MESSAGE_HEADERS
    "${PROJECT_SOURCE_DIR}/messages/include/switchyard/messages/${header}.hpp")
endforeach()
