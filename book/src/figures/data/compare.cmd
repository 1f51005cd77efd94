kvlab compare --random-weights --prompt-len 32 --max-new-tokens 96 --json
