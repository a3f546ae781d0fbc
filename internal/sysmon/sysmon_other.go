//go:build !linux

package sysmon

func find() (int, error) { return 0, ErrNotFound }

func set(int, Policy) (func() error, error) { return nil, ErrNotFound }
