#!/usr/bin/env bash
cd /tmp/large2
for v in full lora full_gc lora_gc; do
  X=""
  case $v in lora) X="--lora 16";; full_gc) X="--grad-ckpt";; lora_gc) X="--lora 16 --grad-ckpt";; esac
  /work/main/.venv/bin/tether bench --size large --iterations 3 --no-peak $X > $v.json 2> $v.log
done
echo done > done.txt
