#!/usr/bin/env bash
# train_drain_controller.sh: train_drain.sh with the "controller" checkpoint store (the drained
# node's agent uploads the shards saved for the drain; the other node downloads them).
DRAIN_STORE=controller exec bash "$(dirname "$0")/train_drain.sh"
