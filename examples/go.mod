module github.com/blkcrypt/blkcrypt/examples

go 1.26.8

require github.com/blkcrypt/blkcrypt v0.0.0

require (
	golang.org/x/crypto v0.59.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	lukechampine.com/adiantum v1.1.1 // indirect
)

replace github.com/blkcrypt/blkcrypt => ../
