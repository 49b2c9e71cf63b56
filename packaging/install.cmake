# Install rules (included by the top CMakeLists.txt): programs, the shared client libraries with
# sonames, the public headers, pkg-config files, man pages and systemd units. Paths follow
# GNUInstallDirs. Files that name install paths (.pc, units) are written at install time by
# generate.cmake, so `cmake --install --prefix P` and DESTDIR both give correct contents.
include(GNUInstallDirs)

set(LOOM_SOVERSION 0 CACHE STRING "soname version of libloomclient, libloomsync, libloomstate")
set(LOOM_SYSTEMD_UNITDIR "" CACHE PATH "systemd unit folder (default PREFIX/lib/systemd/system)")
set(LOOM_SYSUSERSDIR "" CACHE PATH "sysusers.d folder (default PREFIX/lib/sysusers.d)")

set(loom_programs)
foreach(prog loom loomd loom-state)
  if(TARGET ${prog})
    list(APPEND loom_programs ${prog})
  endif()
endforeach()
install(TARGETS ${loom_programs} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# libloomclient.so.0.1.0, the soname link .so.0 and the development link .so; only the public
# loom_* API is exported (exports.map).
set(loom_shared)
foreach(lib loomclient loomsync loomstate)
  if(TARGET ${lib})
    set_target_properties(${lib} PROPERTIES VERSION ${PROJECT_VERSION} SOVERSION ${LOOM_SOVERSION}
                                            LINK_DEPENDS ${PROJECT_SOURCE_DIR}/packaging/exports.map)
    target_link_options(${lib} PRIVATE
                        -Wl,--version-script=${PROJECT_SOURCE_DIR}/packaging/exports.map)
    list(APPEND loom_shared ${lib})
  endif()
endforeach()
install(TARGETS ${loom_shared} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})

# The headers of the installed libraries only (what they declare, they export; install.sh checks
# it): the other modules are linked into the programs statically and have no installed API.
set(loom_public_headers common.h client.h sync.h state.h)
list(TRANSFORM loom_public_headers PREPEND ${PROJECT_SOURCE_DIR}/include/loom/)
install(FILES ${loom_public_headers} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/loom)

# Man pages from each program's --help (help2man), with FILES and SEE ALSO from packaging/man.
find_program(HELP2MAN help2man)
if(HELP2MAN)
  set(pages)
  set(desc_loom "placement, simulation, benchmarks, demos and the command line of the loom control plane")
  set(desc_loomd "the loom control plane daemon")
  set(desc_loom-state "the loom per-node state manager")
  foreach(prog ${loom_programs})
    set(page ${CMAKE_BINARY_DIR}/man/${prog}.1)
    add_custom_command(
      OUTPUT ${page}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/man
      COMMAND ${CMAKE_COMMAND} -E env ASAN_OPTIONS=detect_leaks=0
              ${HELP2MAN} --no-info --no-discard-stderr --version-string=${PROJECT_VERSION}
              --name=${desc_${prog}} --section=1
              --include=${PROJECT_SOURCE_DIR}/packaging/man/${prog}.h2m
              --output=${page} $<TARGET_FILE:${prog}>
      DEPENDS ${prog} ${PROJECT_SOURCE_DIR}/packaging/man/${prog}.h2m
      COMMENT "man page ${prog}.1"
      VERBATIM)
    list(APPEND pages ${page})
  endforeach()
  add_custom_target(man ALL DEPENDS ${pages})
  install(FILES ${pages} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
else()
  message(WARNING "help2man not found (scripts/deps.sh installs it): no man pages")
endif()

install(CODE "
  set(LOOM_VERSION \"${PROJECT_VERSION}\")
  set(LOOM_SOURCE_DIR \"${PROJECT_SOURCE_DIR}\")
  set(LOOM_BINARY_DIR \"${CMAKE_BINARY_DIR}\")
  set(LOOM_BINDIR \"${CMAKE_INSTALL_BINDIR}\")
  set(LOOM_LIBDIR \"${CMAKE_INSTALL_LIBDIR}\")
  set(LOOM_INCLUDEDIR \"${CMAKE_INSTALL_INCLUDEDIR}\")
  set(LOOM_SYSTEMD_UNITDIR \"${LOOM_SYSTEMD_UNITDIR}\")
  set(LOOM_SYSUSERSDIR \"${LOOM_SYSUSERSDIR}\")
  set(LOOM_SHARED \"${loom_shared}\")
  set(LOOM_SYSTEMD_NOTIFY \"${SYSTEMD_FOUND}\")
  include(\"${PROJECT_SOURCE_DIR}/packaging/generate.cmake\")
")
