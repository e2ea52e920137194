module github.com/llmsession/llmsession/bindings/go

go 1.22
