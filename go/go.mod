module github.com/ticketing-lock/ticketing/go

go 1.19
