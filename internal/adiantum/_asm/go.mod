module github.com/blkcrypt/blkcrypt/internal/adiantum/_asm

go 1.26
