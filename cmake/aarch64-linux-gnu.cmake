# aarch64-linux-gnu.cmake: CMake toolchain for building libdtrt for 64-bit
# Arm Linux on a Debian x86-64 host, with `tools/setup.sh cross` installed:
#
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
#         -DDTC_RUNTIME_ONLY=ON && cmake --build build-aarch64
#
# The compiler is Debian's cross GCC; OpenBLAS, cJSON and zlib are the arm64
# multiarch packages (/usr/lib/aarch64-linux-gnu); Open MPI, whose arm64
# packages cannot be installed beside the host's, is Debian's arm64 Open MPI
# unpacked under DTC_CROSS_SYSROOT (default /opt/dtc-cross/aarch64-linux-gnu).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

if(NOT DTC_CROSS_SYSROOT)
  if(DEFINED ENV{DTC_CROSS_SYSROOT})
    set(DTC_CROSS_SYSROOT $ENV{DTC_CROSS_SYSROOT})
  else()
    set(DTC_CROSS_SYSROOT /opt/dtc-cross/aarch64-linux-gnu)
  endif()
endif()
set(DTC_CROSS_SYSROOT ${DTC_CROSS_SYSROOT} CACHE PATH "arm64 Open MPI unpacked here")
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES DTC_CROSS_SYSROOT)

# Libraries and headers of the target only; programs of the host.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu / ${DTC_CROSS_SYSROOT})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

set(CBLAS_INCLUDE /usr/include/aarch64-linux-gnu/openblas-pthread CACHE PATH "")
set(OPENBLAS_LIB /usr/lib/aarch64-linux-gnu/libopenblas.so CACHE FILEPATH "")
set(CJSON_LIB /usr/lib/aarch64-linux-gnu/libcjson.so CACHE FILEPATH "")

# FindMPI without the host's mpicc and mpi-c.pc: the arm64 Open MPI's header
# and library.
set(ENV{PKG_CONFIG_LIBDIR} ${DTC_CROSS_SYSROOT}/usr/lib/aarch64-linux-gnu/pkgconfig)
set(dtc_ompi ${DTC_CROSS_SYSROOT}/usr/lib/aarch64-linux-gnu/openmpi)
set(MPI_ASSUME_NO_BUILTIN_MPI ON CACHE BOOL "")
set(MPI_SKIP_COMPILER_WRAPPER ON CACHE BOOL "")
set(MPI_C_HEADER_DIR ${dtc_ompi}/include CACHE PATH "")
set(MPI_C_LIB_NAMES mpi CACHE STRING "")
set(MPI_mpi_LIBRARY ${dtc_ompi}/lib/libmpi.so CACHE FILEPATH "")
# libmpi's own dependencies (libopen-rte, hwloc, libevent, libudev) for the linker
set(CMAKE_EXE_LINKER_FLAGS_INIT "-Wl,-rpath-link,${DTC_CROSS_SYSROOT}/usr/lib/aarch64-linux-gnu")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "-Wl,-rpath-link,${DTC_CROSS_SYSROOT}/usr/lib/aarch64-linux-gnu")
