#!/usr/bin/env bash
# scratch: the F4 GPU check (not committed)
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv | tee $OUT/gpu_tests.txt
timeout 420 python3 -m pytest -m gpu -q -x tests -p no:cacheprovider 2>&1 | tee -a $OUT/gpu_tests.txt | tail -30
