package fleet

import "context"

// Hooks between the request lifecycle and the pending configurations (filled in with the store).

func (s *Service) onAccepted(id int64) {}

func (s *Service) onEnded(id int64, to State) {}

func (s *Service) followPending(ctx context.Context, d Device, action Action, out Outcome) (Outcome, error) {
	return out, nil
}

func (s *Service) hasPending(id int64) bool { return false }
