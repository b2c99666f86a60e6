package fleet

import "context"

// What the external tests (package fleet_test) use of the service's insides.

// UpdateIfMatch is the service's conditional, sealed write (conditional.go).
func (s *Service) UpdateIfMatch(ctx context.Context, d Device, decide Decide) (Device, bool, error) {
	return s.Requests.core.updateIfMatch(ctx, d, decide)
}

// ReadDevice reads a device as every decision does: with its change log, judged (trust.go).
func (s *Service) ReadDevice(ctx context.Context, id int64) (Device, error) {
	return s.Requests.core.netbox.Device(ctx, id)
}

// CheckOwnedFields is the change-log backstop's check of one device (foreign.go).
func (s *Service) CheckOwnedFields(ctx context.Context, id int64) (Outcome, error) {
	return s.Requests.foreign.checkOwnedFields(ctx, id)
}
