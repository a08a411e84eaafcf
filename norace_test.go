//go:build !race

package blkcrypt

const raceEnabled = false
