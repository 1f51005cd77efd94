kvlab kv-size --layers 32 --kv-heads 32 --head-dim 128 --seq-len 2048 --json
