// Empty: the translation unit that symtune_engine_test_pch builds the engine tests' shared LibTorch
// precompiled header with (tests/CMakeLists.txt).
