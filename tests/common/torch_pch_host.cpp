// Empty: the translation unit that symtune_test_torch_pch builds the Qt-free tests' shared LibTorch
// precompiled header with (tests/CMakeLists.txt).
