# Build only what llama-cpp-python's server loads: libllama and ggml.
#
# Passed to llama-cpp-python's build as
#   CMAKE_ARGS="... -DLLAVA_BUILD=OFF -DCMAKE_PROJECT_llama.cpp_INCLUDE=<this file>"
# CMake includes it right after llama.cpp's project() call. llama-cpp-python forces
# LLAMA_BUILD_COMMON on, but the Python package never loads llama.cpp's common library
# (about half of the compile time: its 51 files and cpp-httplib); turning it off here,
# before llama.cpp reads the option, leaves it out. LLAVA_BUILD=OFF leaves out the
# multimodal library (mtmd), which only the llava chat handlers import. Tests, examples
# and tools are not built anyway when llama.cpp is a subproject.
set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama: build common utils library" FORCE)
