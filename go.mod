module github.com/blkcrypt/blkcrypt

go 1.26.8

require (
	github.com/hanwen/go-fuse/v2 v2.12.1
	golang.org/x/crypto v0.59.0
	golang.org/x/sys v0.50.0
	golang.org/x/term v0.48.0
)

require (
	github.com/go-jose/go-jose/v4 v4.1.9
	github.com/google/go-tpm v0.9.8
)
