# Included right after llama.cpp's project() in llama-cpp-python's build (CMAKE_PROJECT_llama.cpp_INCLUDE, set by
# .ci/run). llama-cpp-python forces LLAMA_BUILD_COMMON on, but its bindings load only libllama and libggml*: the
# common library and cpp-httplib are installed beside them and never loaded (the common library's objects alone took
# 270 CPU seconds, the wheel without them 436; 2026-11-28). A normal variable here shadows the forced cache entry in
# llama.cpp's scope, and option() keeps it.
set(LLAMA_BUILD_COMMON OFF)
