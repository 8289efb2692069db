#!/bin/sh
# Regenerates the build system: ./autogen.sh && ./configure && make
set -e
cd "$(dirname "$0")"
mkdir -p m4 build-aux
autoreconf --install --force
