kvlab evict-speed --model models/smollm2-135m-instruct --text-file tests/fixtures/eval/gpl-3-head.txt --window 256 --sinks 4 --contexts 512,1024,1536,2048 --reps 21 --json
