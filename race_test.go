//go:build race

package blkcrypt

const raceEnabled = true
