kvlab capacity --budget 64MiB --json
kvlab capacity --budget 128MiB --json
kvlab capacity --budget 256MiB --json
kvlab capacity --budget 512MiB --json
kvlab capacity --budget 1GiB --json
kvlab capacity --budget 2GiB --json
kvlab capacity --budget 4GiB --json
