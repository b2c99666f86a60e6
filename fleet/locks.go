package fleet

import "sync"

// deviceLocks serialises all work on one device inside this process: concurrent webhooks, the
// periodic reconcile, Workflow watch events, enrollments and configuration fetches for the same
// device run one at a time, so a request is claimed once and its Workflow created once.
type deviceLocks struct {
	mu    sync.Mutex
	locks map[int64]*deviceLock
}

type deviceLock struct {
	mu   sync.Mutex
	refs int
}

func (l *deviceLocks) lock(id int64) (unlock func()) {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = make(map[int64]*deviceLock)
	}
	dl := l.locks[id]
	if dl == nil {
		dl = &deviceLock{}
		l.locks[id] = dl
	}
	dl.refs++
	l.mu.Unlock()

	dl.mu.Lock()
	return func() {
		dl.mu.Unlock()
		l.mu.Lock()
		dl.refs--
		if dl.refs == 0 {
			delete(l.locks, id)
		}
		l.mu.Unlock()
	}
}
