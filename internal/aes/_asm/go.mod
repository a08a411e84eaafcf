module github.com/blkcrypt/blkcrypt/internal/aes/_asm

go 1.26
