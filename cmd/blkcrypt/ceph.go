//go:build ceph && cgo && linux

package main

// With the ceph build tag the command takes rbd:POOL/IMAGE[@conf=FILE]
// devices through librbd (package rbd).
import _ "github.com/blkcrypt/blkcrypt/rbd"
