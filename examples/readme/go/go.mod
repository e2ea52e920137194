module github.com/llmsession/llmsession/examples/readme/go

go 1.22

require github.com/llmsession/llmsession/bindings/go v0.0.0

replace github.com/llmsession/llmsession/bindings/go => ../../../bindings/go
