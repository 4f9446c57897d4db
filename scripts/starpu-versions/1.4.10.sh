# shellcheck shell=bash
# StarPU 1.4.10: what scripts/build-starpu --version 1.4.10 needs to know.
#
# Design: a version file only describes (variables, no commands), so that
# build-starpu keeps one download/patch/configure/cache path for every
# version and `source`-ing a file has no side effect.  The matching
# description of the 1.3.10 build is 1.3.10.sh; both set the same names.
#
# Source: Debian sid's package starpu 1.4.10+dfsg-2 (trixie has 1.4.7).
# bookworm's apt knows no 1.4 source, so the build adds a deb-src entry for
# sid *as a file of its own* (STARPU_DEB_SRC_TEMPORARY=1), runs a plain
# `apt-get update`, `apt-get source starpu=$STARPU_DEB_VERSION`, then removes
# the file and runs `apt-get update` again so that no sid list stays behind.
# (Do not restrict that update to the one file with -o Dir::Etc::SourceList:
# apt then deletes every other list under /var/lib/apt/lists.)

STARPU_VERSION=1.4.10
# pkg-config modules and header directory (include/starpu/1.4) of the series
STARPU_SERIES=1.4
STARPU_PC_MODULE=starpu-1.4
STARPU_MPI_PC_MODULE=starpumpi-1.4

STARPU_DEB_SUITE=sid
STARPU_DEB_VERSION=1.4.10+dfsg-2
STARPU_DEB_SRC_TEMPORARY=1
# the upstream tarball inside the source package (Debian's +dfsg repack:
# non-free files removed) and the tree `apt-get source` unpacks
STARPU_TARBALL=starpu_1.4.10+dfsg.orig.tar.gz
STARPU_TARBALL_SHA256=6b3bb9ec0d79f937882148b2da09ae6cb0ad4d1e83a104be45723dd70eba99c3
STARPU_SRC_DIR=starpu-1.4.10+dfsg

# scripts/patches/ files applied (patch -p1, in the unpacked tree) to every
# variant, and only with --cuda.  1.4.10 builds without CUDA as shipped; with
# CUDA 13 it needs the v2-only cuBLAS start-up (no cublasInit /
# cublasSetKernelStream) and the compute mode read as a device attribute.
STARPU_PATCHES=()
STARPU_CUDA_PATCHES=(starpu-1.4.10-cuda13.patch)
STARPU_SIMGRID_PATCHES=()  # patches for --simgrid [--mpi] only; line not stamped

# configure accepts any --enable-maxcpus (STARPU_NMAXWORKERS follows);
# 256 covers today's largest nodes (2 x 128 cores)
STARPU_MAXCPUS=256
# Added to every variant's configure line.  1.4 builds by default, when it
# finds Python or OpenCL, parts taskgrad does not use and that only cost
# build time: the Python interface and SOCL (OpenCL on top of StarPU).
STARPU_EXTRA_CONFIGURE=(
    --disable-starpupy
    --disable-socl
)
