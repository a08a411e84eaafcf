.PHONY: test demo bench build
test:
	./scripts/test.sh
demo:
	go run ./cmd/blkcrypt demo
build:
	go build -o blkcrypt ./cmd/blkcrypt
bench:
	./bench/compare.sh
