# Decides SYMTUNE_BUILD_UI and finds Qt 6 for the studio, graphview/ and the tests.
#
# The studio is on unless asked off (-DSYMTUNE_BUILD_UI=OFF, as the gpu preset does): a missing
# Qt component stops configuration with the Debian package that provides it, instead of building
# less than asked for. Qt's own "not found" is too quiet for that: a component whose CMake package
# depends on another missing one (Charts on OpenGL) just reports Qt6_FOUND false.

option(SYMTUNE_BUILD_UI "Build the Qt studio (graphview/, ui/, the studio in app/) and the test suite"
       ON)
if(NOT SYMTUNE_BUILD_UI)
  message(STATUS "SYMTUNE_BUILD_UI is OFF: no studio, and only the Qt-free tests")
  return()
endif()

# Each component with the Debian packages that provide its CMake package and what it loads.
set(_symtune_qt_components Widgets Test Charts Svg Network)
set(_symtune_qt_package_Widgets "qt6-base-dev, libgl-dev")
set(_symtune_qt_package_Network "qt6-base-dev")  # the tests' stand-in runs (QLocalServer)
set(_symtune_qt_package_Test "qt6-base-dev")
set(_symtune_qt_package_Charts "qt6-charts-dev, libqt6opengl6-dev")
set(_symtune_qt_package_Svg "qt6-svg-dev")

set(_missing "")
foreach(component IN LISTS _symtune_qt_components)
  find_package(Qt6${component} 6.2 QUIET)
  if(NOT Qt6${component}_FOUND)
    list(APPEND _missing "Qt 6 ${component} (Debian: ${_symtune_qt_package_${component}})")
  endif()
endforeach()
if(_missing)
  list(JOIN _missing "\n  " _text)
  message(FATAL_ERROR "The studio and the test suite need Qt 6, and these parts are missing:\n"
                      "  ${_text}\n"
                      "Install them (scripts/test.sh does), or configure with "
                      "-DSYMTUNE_BUILD_UI=OFF to build the engine and runner alone.")
endif()
find_package(Qt6 6.2 REQUIRED COMPONENTS ${_symtune_qt_components})
