# loom_add_plugin(<target> KIND <comm|parallel|precision|ckpt> SOURCES <files...> [NAME <file-name>])
#
# Builds a Loom plugin as a MODULE library named libloom-<kind>-<name>.so (name defaults to the
# target), compiled against the SDK headers only, with every symbol hidden except the entry
# (loom_plugin.map: hidden visibility alone leaves libstdc++'s template instantiations exported).
# Inside the Loom build tree it lands in the built-in plugin directory and is installed there.
function(loom_add_plugin target)
  cmake_parse_arguments(ARG "" "KIND;NAME" "SOURCES" ${ARGN})
  if(NOT ARG_KIND)
    message(FATAL_ERROR "loom_add_plugin(${target}): KIND is required")
  endif()
  if(NOT ARG_NAME)
    set(ARG_NAME ${target})
  endif()
  set(map ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/loom_plugin.map)  # beside this file, wherever it is
  add_library(${target} MODULE ${ARG_SOURCES})
  target_link_libraries(${target} PRIVATE Loom::sdk)
  set_target_properties(${target} PROPERTIES
    PREFIX "lib" OUTPUT_NAME "loom-${ARG_KIND}-${ARG_NAME}"
    CXX_STANDARD 20 CXX_STANDARD_REQUIRED ON
    CXX_VISIBILITY_PRESET hidden C_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
    LINK_DEPENDS ${map})
  target_link_options(${target} PRIVATE "LINKER:--version-script=${map}")
  if(DEFINED LOOM_PLUGIN_OUTPUT_DIR)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${LOOM_PLUGIN_OUTPUT_DIR})
    install(TARGETS ${target} LIBRARY DESTINATION ${LOOM_PLUGIN_INSTALL_DIR})
  endif()
endfunction()
