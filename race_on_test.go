//go:build race

package amigo_test

const raceEnabled = true
