kvlab gqa --sweep 1,1024,2048,4096,6000,8000 --reps 3 --json
