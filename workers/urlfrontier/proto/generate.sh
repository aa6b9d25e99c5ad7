#!/usr/bin/env bash
# Regenerate the checked-in Python stubs of the URLFrontier 2.6 API from urlfrontier.proto (a copy of
# crawler-commons' API/src/main/protobuf/urlfrontier.proto). Needs grpcio-tools (pip install grpcio-tools).
#   bash workers/urlfrontier/proto/generate.sh
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
"$PY" -m grpc_tools.protoc -I. --python_out=. --pyi_out=. --grpc_python_out=. urlfrontier.proto
# the generated service module imports its messages as a top-level module: make it relative
sed -i 's/^import urlfrontier_pb2 as urlfrontier__pb2$/from . import urlfrontier_pb2 as urlfrontier__pb2/' urlfrontier_pb2_grpc.py
