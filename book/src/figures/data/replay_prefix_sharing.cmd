kvlab record prefix-sharing --model models/smollm2-135m-instruct --out book/src/replays/prefix-sharing.json --json
