kvlab bench-batch --model models/smollm2-135m-instruct --concurrency 4 --prompt-len 128 --max-tokens 64 --speculative ngram --draft-len 4 --json
