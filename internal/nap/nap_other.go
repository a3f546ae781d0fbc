//go:build !linux

package nap

import "time"

func nap(d time.Duration) { time.Sleep(d) }
