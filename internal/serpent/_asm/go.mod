module github.com/blkcrypt/blkcrypt/internal/serpent/_asm

go 1.26
