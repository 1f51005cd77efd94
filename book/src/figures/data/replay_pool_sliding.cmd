kvlab record pool-sliding --model models/smollm2-135m-instruct --out book/src/replays/pool-sliding.json --json
