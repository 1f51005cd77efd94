kvlab bench-batch --model models/smollm2-135m-instruct --concurrency 1,2,4,8,16 --max-tokens 32 --json
