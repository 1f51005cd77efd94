kvlab record stall-continuous --model models/smollm2-135m-instruct --out book/src/replays/stall-continuous.json --json
