kvlab prefix --model models/smollm2-135m-instruct --requests 4 --shared-len 768 --json
