kvlab attention-map --model models/smollm2-135m-instruct --prompt "The cat sat on the mat because it was tired. The dog slept on the rug because it was cold." --layer 3 --head 0 --json
