//go:build !race

package tcp

func raceReleaseMerge() {}
func raceAcquire()      {}
