package units

import "testing"

func TestToFahrenheit(t *testing.T) {
	cases := []struct {
		name string
		c    float64
		want float64
	}{
		{"freezing", 0, 32},
		{"boiling", 100, 212},
		{"body", 37, 98.6},
		{"minus forty", -40, -40},
		// Issue #12: fails today, ToFahrenheit returns 71.
		{"room", 21.7, 71.06},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := ToFahrenheit(tc.c)
			if diff := got - tc.want; diff > 0.001 || diff < -0.001 {
				t.Errorf("ToFahrenheit(%v) = %v, want %v", tc.c, got, tc.want)
			}
		})
	}
}

func TestRound(t *testing.T) {
	cases := []struct {
		v      float64
		digits int
		want   float64
	}{
		{71.06, 1, 71.1},
		{-3.25, 1, -3.3},
		{2.5, 0, 3},
		{1234.5678, 2, 1234.57},
	}
	for _, tc := range cases {
		if got := Round(tc.v, tc.digits); got != tc.want {
			t.Errorf("Round(%v, %d) = %v, want %v", tc.v, tc.digits, got, tc.want)
		}
	}
}

func TestConvert(t *testing.T) {
	if _, ok := Convert(10, "kelvin"); ok {
		t.Error("Convert accepted the unknown unit system kelvin")
	}
	if got, _ := Convert(10, ""); got != 10 {
		t.Errorf("Convert(10, \"\") = %v, want 10 (metric is the default)", got)
	}
}
