package flight_test

import (
	"os"
	"testing"

	"berth.dev/berth/internal/app/apptest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	apptest.Cleanup()
	os.Exit(code)
}
