# Build only what llama-cpp-python's server loads (libllama and ggml), and record the build.
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

# The build record: llama_cpp/lib/loop_agents_build.json in the wheel, next to the
# libraries. pip's wheel cache does not look at CMAKE_ARGS, so a wheel of the same version
# built earlier with other flags can be installed in place of this build; the record says
# which flags a build had (every GGML_*, LLAMA_* and LLAVA_* setting given so far, i.e.
# on the command line or forced by llama-cpp-python), the compiler flags it took from the
# environment (CFLAGS and CXXFLAGS, which CMake adds to every compile: -march=native there
# makes code another CPU cannot run), which version of this file it included (its
# SHA-256) and when it was made. loop_agents_cli.models.llama_build reads it.
function(loop_agents_json_string out value)
  string(REPLACE "\\" "\\\\" value "${value}")
  string(REPLACE "\"" "\\\"" value "${value}")
  string(REPLACE "\n" "\\n" value "${value}")
  string(REPLACE "\t" "\\t" value "${value}")
  set(${out} "\"${value}\"" PARENT_SCOPE)
endfunction()

string(TIMESTAMP _loop_agents_built "%Y-%m-%dT%H:%M:%SZ" UTC)
file(SHA256 "${CMAKE_CURRENT_LIST_FILE}" _loop_agents_sha256)
loop_agents_json_string(_loop_agents_args "$ENV{CMAKE_ARGS}")
loop_agents_json_string(_loop_agents_cflags "$ENV{CFLAGS}")
loop_agents_json_string(_loop_agents_cxxflags "$ENV{CXXFLAGS}")
get_cmake_property(_loop_agents_cache CACHE_VARIABLES)
list(SORT _loop_agents_cache)
set(_loop_agents_flags "")
foreach(_loop_agents_name IN LISTS _loop_agents_cache)
  if(_loop_agents_name MATCHES "^(GGML|LLAMA|LLAVA)_")
    loop_agents_json_string(_loop_agents_value "${${_loop_agents_name}}")
    if(_loop_agents_flags)
      string(APPEND _loop_agents_flags ",\n")
    endif()
    string(APPEND _loop_agents_flags "    \"${_loop_agents_name}\": ${_loop_agents_value}")
  endif()
endforeach()
set(_loop_agents_record "${CMAKE_CURRENT_BINARY_DIR}/loop_agents_build.json")
file(WRITE "${_loop_agents_record}" "{\n  \"format\": 2,\n  \"built\": \"${_loop_agents_built}\",\n  \"include_sha256\": \"${_loop_agents_sha256}\",\n  \"cmake_args\": ${_loop_agents_args},\n  \"compiler_flags\": {\"CFLAGS\": ${_loop_agents_cflags}, \"CXXFLAGS\": ${_loop_agents_cxxflags}},\n  \"flags\": {\n${_loop_agents_flags}\n  }\n}\n")
if(DEFINED SKBUILD_PLATLIB_DIR)
  install(FILES "${_loop_agents_record}" DESTINATION "${SKBUILD_PLATLIB_DIR}/llama_cpp/lib")
endif()
