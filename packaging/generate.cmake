# Runs at install time (install(CODE) in install.cmake), after CMAKE_INSTALL_PREFIX has its final
# value: writes the pkg-config files and systemd units with the installed paths, then installs
# them (file(INSTALL) adds DESTDIR). Inputs: the LOOM_* variables set by install.cmake.

# GNUInstallDirs folders may be relative (to the prefix) or absolute.
function(loom_abs out dir)
  if(IS_ABSOLUTE "${dir}")
    set(${out} "${dir}" PARENT_SCOPE)
  else()
    set(${out} "${CMAKE_INSTALL_PREFIX}/${dir}" PARENT_SCOPE)
  endif()
endfunction()

# In .pc files, ${prefix}-relative when possible, as pkg-config users expect.
function(loom_pc out dir)
  if(IS_ABSOLUTE "${dir}")
    set(${out} "${dir}" PARENT_SCOPE)
  else()
    set(${out} "\${prefix}/${dir}" PARENT_SCOPE)
  endif()
endfunction()

set(gen "${LOOM_BINARY_DIR}/packaging")
set(prefix "${CMAKE_INSTALL_PREFIX}")
set(version "${LOOM_VERSION}")
loom_pc(libdir "${LOOM_LIBDIR}")
loom_pc(includedir "${LOOM_INCLUDEDIR}")
loom_abs(libdir_abs "${LOOM_LIBDIR}")

set(pcs)
foreach(pair "loomclient;loom-client" "loomsync;loom-sync" "loomstate;loom-state")
  list(GET pair 0 lib)
  list(GET pair 1 pc)
  list(FIND LOOM_SHARED ${lib} at)
  if(at GREATER -1)
    configure_file("${LOOM_SOURCE_DIR}/packaging/pkgconfig/${pc}.pc.in" "${gen}/${pc}.pc" @ONLY)
    list(APPEND pcs "${gen}/${pc}.pc")
  endif()
endforeach()
file(INSTALL ${pcs} DESTINATION "${libdir_abs}/pkgconfig")

# Units: ExecStart names the installed programs. Their state (/var/lib) and options
# (/etc/default) are the system's whatever the prefix.
loom_abs(bindir "${LOOM_BINDIR}")
set(unitdir "${LOOM_SYSTEMD_UNITDIR}")
if(NOT unitdir)
  set(unitdir "${CMAKE_INSTALL_PREFIX}/lib/systemd/system")
endif()
set(sysusersdir "${LOOM_SYSUSERSDIR}")
if(NOT sysusersdir)
  set(sysusersdir "${CMAKE_INSTALL_PREFIX}/lib/sysusers.d")
endif()
foreach(unit loomd loom-state)
  configure_file("${LOOM_SOURCE_DIR}/packaging/systemd/${unit}.service.in"
                 "${gen}/${unit}.service" @ONLY)
  if(NOT LOOM_SYSTEMD_NOTIFY) # built without libsystemd: the programs cannot say READY
    file(READ "${gen}/${unit}.service" text)
    string(REPLACE "Type=notify" "Type=simple" text "${text}")
    string(REGEX REPLACE "\n(NotifyAccess|WatchdogSec)=[^\n]*" "" text "${text}")
    file(WRITE "${gen}/${unit}.service" "${text}")
  endif()
  file(INSTALL "${gen}/${unit}.service" DESTINATION "${unitdir}")
endforeach()
file(INSTALL "${LOOM_SOURCE_DIR}/packaging/systemd/loom.sysusers" DESTINATION "${sysusersdir}"
     RENAME loom.conf)
