// SPDX-License-Identifier: Apache-2.0
// A shared library named like a backend module but without its entry point.
extern "C" int switchyard_not_a_module() { return 0; }
