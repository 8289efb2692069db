#!/usr/bin/env bash
# train_shrink_controller.sh: train_shrink.sh with the "controller" checkpoint store (no shared
# directory: the surviving node downloads the shards of the ranks it runs).
SHRINK_STORE=controller exec bash "$(dirname "$0")/train_shrink.sh"
