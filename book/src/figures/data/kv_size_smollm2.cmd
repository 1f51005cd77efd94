kvlab kv-size --layers 30 --kv-heads 3 --head-dim 64 --seq-len 2048 --json
