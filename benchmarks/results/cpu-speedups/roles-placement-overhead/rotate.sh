#!/usr/bin/env bash
# Alternate pre-change and post-change benches: small, fp32 and bf16, 3 rounds.
cd /tmp/bench20
PY=/work/main/.venv/bin/python
for r in 1 2 3; do
  for prec in fp32 bf16; do
    PYTHONPATH=/tmp/pre20/src $PY -m tether.cli bench --size small --precision $prec --no-peak > pre_${prec}_r$r.json 2> pre_${prec}_r$r.log
    $PY -m tether.cli bench --size small --precision $prec --no-peak > post_${prec}_r$r.json 2> post_${prec}_r$r.log
  done
done
echo done > done.txt
