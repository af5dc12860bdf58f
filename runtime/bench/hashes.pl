# perl building three hashes of 120 000 keys and keeping them (issue 29, item 1): glibc's heap ends
# up with hundreds of thousands of chunks, the shape on which a call whose cost grows with the heap
# (mallinfo2) shows. Prints the number of keys kept. Used by tests/e2e/harmless.rs and
# scripts/harmless-bench.sh.
my @keep;
for my $n (1 .. 3) {
    my %h;
    $h{"key$n.$_"} = "value $_ " x 3 for 1 .. 120000;
    push @keep, \%h;
}
print scalar(map { keys %$_ } @keep), "\n";
