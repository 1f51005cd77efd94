kvlab record pool-int8 --model models/smollm2-135m-instruct --out book/src/replays/pool-int8.json --json
